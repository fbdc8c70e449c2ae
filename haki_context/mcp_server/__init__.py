"""The MCP server of the memory (docs/agents.md): its tools and resources (server.py), each running
a GraphQL operation in-process (operations.py, gateway.py), served over streamable HTTP at /mcp
(http.py) and over stdio by `haki-context mcp` (stdio.py)."""
