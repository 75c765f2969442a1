"""statstorm: find, explain, fix and prove the file-system cost of PHP web serving."""

__version__ = "0.1.0"
