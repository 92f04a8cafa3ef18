"""The EverMemOS-style memory system."""
