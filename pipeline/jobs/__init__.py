"""The client's side of a job: planning, watching and each job kind's steps. Nothing is imported here."""
