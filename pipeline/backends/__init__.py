"""Layer 1: language models, embeddings, token counting and lexical search."""
