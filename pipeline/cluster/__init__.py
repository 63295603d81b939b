"""Starting and stopping clusters, run by the process that owns them: ``local`` for the embedded
cluster or a configured scheduler, ``resident`` for the one ``python -m pipeline up`` leaves
running, ``hosts`` for the one-command-per-host scheduler and worker. Nothing is imported here."""
