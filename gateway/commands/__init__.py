"""What an operator runs beside the gateway itself, each a sub-command of `mcp-task-gateway`:

* `config check` (`config_check`): load a configuration as the gateway would, print each
  route and ask each upstream whether it answers; nothing is served.
* `tasks` and `sessions` (`admin`): list, show and cancel through a running gateway's admin
  API, or read the store directly when no gateway runs.
* `store` (`store`): back up, restore and erase the task store.

`cli.py` picks the command; each module here parses its own arguments and returns an exit code.
"""
