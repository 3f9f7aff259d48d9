"""What an operator runs beside the gateway itself, each a sub-command of `mcp-task-gateway`:

* `config check` (`config_check`): load a configuration as the gateway would, check that the
  files it writes can be written (`writable`), print each route (or, with `--json`, one
  document: `check_report`) and ask each upstream whether it answers; nothing is served.
* `tasks` and `sessions` (`admin`): list, show, cancel and purge through a running gateway's admin
  API, or read the store directly when no gateway runs.
* `store` (`store`): back up, restore and erase the task store.

`cli.py` picks the command (its `COMMANDS`, which `--help` lists); each module here parses its
own arguments and returns an exit code.
"""
