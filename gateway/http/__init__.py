"""The HTTP edge: client-compatible APIs (OpenAI, Cohere/Jina), the native capability API,
health and metrics. Handlers are plain functions over a shared `Edge`."""
