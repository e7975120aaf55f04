"""Ollama: llama.cpp with Ollama's own defaults by version, its memory estimate and layer-offload decision,
its local model store (name:tag -> manifest -> GGUF blob) and its log and `ollama ps` lines."""
