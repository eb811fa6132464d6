"""Step types: one small module each, registered in `registry`."""
