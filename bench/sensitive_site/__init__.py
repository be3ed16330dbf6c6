"""The site bench/sensitive.py drains: the README's settings with an encryption key and
three no-op jobs that differ only in what they encrypt."""
