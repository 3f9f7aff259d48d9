"""`python -m gateway.demo`: the demo legacy server on stdio (see `gateway.demo.stdio`)."""

from gateway.demo.stdio import main

main()
