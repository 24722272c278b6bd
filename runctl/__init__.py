"""Run control, the bottom layer every long-running part shares: stop requests
(Ctrl-C, SIGTERM) and their exit codes, and progress tickers."""
