"""Run control, the bottom layer every long-running part shares: stop requests
(Ctrl-C, SIGTERM) and their exit codes, a run's wall-clock bound,
progress tickers, and work spread over worker processes."""
