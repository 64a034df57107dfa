"""Test helpers shared by prbench's own tests and by anyone testing code built on prbench.

- `prbench.testing.tiny`: tiny random tokenizers and models (kilobytes, built in milliseconds)
  saved with `save_pretrained`, so tests exercise the same `from_pretrained(dir)` path users hit.
- `prbench.testing.openai_server`: a real OpenAI-compatible HTTP server on 127.0.0.1 with
  scripted replies and a fault schedule (rate limits, 5xx, timeouts, broken bodies, resets).

Both are imported lazily by their users; importing this package pulls in nothing heavy.
"""
