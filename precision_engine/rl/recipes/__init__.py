"""Recipes: a task's data, tokenizer and reward. The engine and trainer see token ids and rewards only; the
recipe owns the text. `math` is the built-in one."""
