"""haki-context: a GraphQL server that gives AI agents a long-term memory they can trust."""

__version__ = "0.1.0"
