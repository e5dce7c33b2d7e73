"""The course's data: the real LFW's statistics and the painter of the synthetic stand-in.

This is data generation, not an instrument: :mod:`lfw_dataset` calls it to make the tree.
"""
