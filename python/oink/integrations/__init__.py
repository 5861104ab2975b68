"""Integrations of oink with other libraries. ``oink.integrations.transformers`` patches a loaded
Hugging Face model's norms (and its causal-LM loss) to run on oink; it imports transformers only
when it is imported itself."""
