"""What is served: model facts (ModelSpec), read from config.json, safetensors headers or the bundled
catalog."""
