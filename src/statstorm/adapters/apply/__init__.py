"""apply's side effects: where changes go, backup sets, live storage steps, a pool's
test/reload/health cycle, and the change as one transaction."""
