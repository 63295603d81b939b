"""The command line, one room: the parser and dispatch (``main``), and each command as the user
sees it (what it prints, its exit codes): ``run`` (run), ``up`` / ``status`` / ``down``
(resident_commands), ``serve`` (serve), ``bench`` (bench), ``scheduler`` / ``worker`` and
``check-config`` / ``prepare-model`` (main). The work each command asks for is done below:
pipeline/jobs/ (a job), pipeline/cluster/ (clusters), pipeline/service/ (the batch service),
pipeline/bench/ (the benchmark). Nothing below imports this package."""
