"""The host as the kernel shows it: processes and ports, memory and huge pages, PSS, ELF
segments, and the exporter's HTTP side."""
