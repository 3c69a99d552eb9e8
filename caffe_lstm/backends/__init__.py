"""Backends: walks over the graph that execute it or write it in another format."""
