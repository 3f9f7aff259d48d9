"""Who may call, and how much: authentication and per-caller limits.

`auth` turns an Authorization header into a `Principal` (API key or JWT, verified by
`jwt_verify`; an opaque OAuth token asked about by `introspection`), or refuses with an
`AuthError` whose reason is safe to show; `limits` is the token bucket behind the
request-rate limit. This package knows nothing of sessions or tasks: the HTTP admission step
(`gateway.http.admission`) applies it to each request.
"""
