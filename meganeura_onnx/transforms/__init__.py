"""Graph transforms: autodiff, optimizer update graphs and rewrites."""

from .autodiff import Gradients, gradients, parameter_gradients

__all__ = ["Gradients", "gradients", "parameter_gradients"]
