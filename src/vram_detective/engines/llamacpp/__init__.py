"""llama.cpp (and programs that embed it: llama-server, llama-cpp-python, Ollama): pure memory rules.

Every rule cites the llama.cpp source file it was read from and the build; build-dependent rules live in
releases.py (the one rule table by build number).
"""
