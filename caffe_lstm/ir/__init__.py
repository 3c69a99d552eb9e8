"""The format-free IR: Graph, Node, Value, and a text dump (imports nothing of the project)."""
