"""How each inference engine accounts memory. Everything engine-specific lives under its own package."""
