"""interop layer."""
