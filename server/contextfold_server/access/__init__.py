"""Who is calling and what they may do: API keys, namespaces and roles."""
