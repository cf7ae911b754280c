"""Real test bed: deterministic tiny GGUF models and a real llama-server process for the tests."""
