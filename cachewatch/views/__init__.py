"""What every interface shows, composed once from the errands: a function's detail, a run's report, the diagnosis and the runner's summary."""
