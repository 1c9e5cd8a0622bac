"""Evaluation: the instrument (``lm``) and the zoo suite."""
