"""Notebook 01 (the dataset class): wrong answers and delegations (see ``__init__.py``)."""

from wrong_answers import wrong

DELEGATIONS = {
    "find_people": """
        import lfw_dataset


        def find_people(root):
            return lfw_dataset.find_classes(root)
    """,
    "list_images": """
        import lfw_dataset


        def list_images(root, class_to_idx, _samples=lfw_dataset.make_samples):
            return _samples(root, class_to_idx)
    """,
    "load_rgb": "from lfw_dataset import load_image as load_rgb",
    "faces_dataset": """
        import lfw_dataset


        class FacesDataset(lfw_dataset.LFWDataset):
            pass
    """,
}

WRONG_ANSWERS = []
