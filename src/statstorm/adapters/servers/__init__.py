"""Web servers in front of PHP as check reads them: nginx (its configuration read with
crossplane, the sites passing to a pool, reload) and Apache (its configuration, the facts
built from it)."""
