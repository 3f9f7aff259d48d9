"""What operators see: Prometheus metrics (`metrics`, on a per-app registry with labels from
closed sets, never a task or session id), the audit log of task lifecycle and access events
as JSON lines (`audit`), and the process log, one line per record with client text escaped
(`logs`)."""
