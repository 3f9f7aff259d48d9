"""The operators' console: the admin API as pages in a browser, on the admin listener.

An operator asked "what is running, for whom, what is stuck, and stop that one" opens
`/admin/console/` on `admin.listen` (the gateway's own port answers 404 there), signs in with
the admin token, and reads the tasks (filtered by route, principal, status and age, refreshed
live), one task, the sessions and the routes, and cancels a task, ends a session or purges
finished tasks, each after a confirmation. The flow of a request:

    admin.listen → `http.admin` (the API's guard lets the console's paths through)
      → `access` (session cookie, CSRF and Origin checks, errors as pages)
      → `views` (reading: the store, the routes, `upstream_up`) or `actions` (the API's own
        cancel, end and purge, audited as the operator's) → `pages` (templates, headers)

`site` holds the URL table. Pages are server-side Jinja2 templates that read fine with
JavaScript off; the only script, an external file, refreshes the tables in place. Nothing
comes from another origin, and the Content-Security-Policy allows nothing that would.
"""
