"""Web servers in front of PHP as check reads them: nginx (`nginx -T`, the server passing to a
pool, reload) and Apache (its configuration, the facts built from it)."""
