"""What `mcp-task-gateway` runs: the gateway itself (`serve`, without a command) and, beside it,
the operator's sub-commands:

* `config check` (`config_check`): load a configuration as the gateway would, check that the
  files it writes can be written (`writable`), print each route (or, with `--json`, one
  document: `check_report`) and ask each upstream whether it answers; nothing is served.
* `tasks` and `sessions` (`admin`): list, show, cancel and purge through a running gateway's admin
  API.
* `store` (`store`): back up the task store, or erase a principal's tasks and sessions.

`cli.py` picks the command (its `COMMANDS`, which `--help` lists) and imports its module only
then; each module here parses its own arguments and returns an exit code.
"""
