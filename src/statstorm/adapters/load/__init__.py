"""HTTP load and the verbs' own requests: wrk, ab and vegeta behind one interface, wrk with
every answer checked, the one HTTP client, and the server-side signals sampled while load
runs."""
