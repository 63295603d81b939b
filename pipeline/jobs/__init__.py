"""The client's side of a job: planning and watching it on the cluster, and the steps of file, DataFrame and stream
jobs. Nothing is imported here; import the modules."""
