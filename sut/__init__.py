"""The system-under-test protocol every scheduler is driven through, the trace
view checks read, and the reference model behind the protocol (`model_sut`)."""
