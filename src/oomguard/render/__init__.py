"""Renderers: results -> text, JSON, Markdown. They format; they never compute."""
