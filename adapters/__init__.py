"""Adapters: loopcheck's torch engine and the real engines (vLLM, SGLang,
LMDeploy), each a factory `Config -> system`, and the loader that resolves
`--adapter` names."""
