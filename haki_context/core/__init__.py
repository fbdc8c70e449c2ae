"""Domain rules and the assembler pipeline: no GraphQL, no SQL text."""
