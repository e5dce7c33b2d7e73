"""Notebook 04 (augmentation cost): wrong answers and delegations (see ``__init__.py``).

The tests of ``seed_worker`` start DataLoader workers, so its wrong answers are one per
mistake, and none raises inside a worker: an error raised there leaves the loader's iterator
in a reference cycle, and whenever the garbage collector frees it, its shutdown waits 5 s
for each worker (``nb01_dataset.py`` says more).
"""

import textwrap

from wrong_answers import wrong

DELEGATIONS = {
    "fast_faces": """
        from feedgpu.workloads.lfw import decode_tensor, read_bytes


        class FastFaces(Dataset):
            def __init__(self, samples):
                self.samples = list(samples)

            def __len__(self):
                return len(self.samples)

            def __getitem__(self, index):
                path, label = self.samples[index]
                image = decode_tensor(read_bytes(path))
                return (image.flip(-1) if torch.rand(()) < 0.5 else image), label
    """,
}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def _indent(code: str, spaces: int) -> str:
    return textwrap.indent(_src(code), " " * spaces).lstrip()


def _function(signature: str, *parts: str) -> str:
    """``def signature:`` with the body ``parts`` (each a block of code; empty ones left out)."""
    return "\n".join([f"def {signature}:", *(textwrap.indent(_src(part), " " * 4) for part in parts if part)])


_FAST_FACES = '''
class FastFaces(Dataset):
    def __init__(self, samples):
        self.samples = list(samples)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        {image}
        {flip}
        return image, label
'''

_FLIP = "if torch.rand(()) < 0.5:\n    image = image.flip(-1)"


def _fast_faces(image: str, flip: str = _FLIP) -> str:
    return _src(_FAST_FACES).format(image=image, flip=_indent(flip, 8) if flip else "")


def _seed_worker(body: str, main_check: bool = True) -> str:
    """``seed_worker`` that does ``body`` with ``info``; it returns in the main process if ``main_check``."""
    return _function("seed_worker(worker_id)", "info = get_worker_info()",
                     "if info is None:\n    return" if main_check else "", body)


WRONG_ANSWERS = [
    # ---------------------------------------------------------------- Part C: FastFaces
    wrong("fast_faces", "float pixels in the dataset: ToTensor's work and bytes kept", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB).float() / 255"),
        "test_fast_faces_items"),
    wrong("fast_faces", "never flipped", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB)", flip=""),
        "test_fast_faces_items"),
    wrong("fast_faces", "always flipped", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB)", flip="image = image.flip(-1)"),
        "test_fast_faces_items"),
    wrong("fast_faces", "flipped upside down, not left to right", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB)",
        flip="if torch.rand(()) < 0.5:\n    image = image.flip(-2)"),
        "test_fast_faces_items"),
    wrong("fast_faces", "the flip drawn from numpy's global generator, not torch's", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB)",
        flip="if np.random.random() < 0.5:\n    image = image.flip(-1)"),
        "test_fast_faces_items"),
    wrong("fast_faces", "the slow pipeline's PIL and ToTensor, turned back into bytes", _fast_faces(
        "image = (transforms.ToTensor()(decode_pil(read_bytes(path))) * 255).round().to(torch.uint8)"),
        "test_fast_faces_is_faster"),
    wrong("fast_faces", "the image in height x width x channels", _fast_faces(
        "image = decode_jpeg(read_file(str(path)), mode=ImageReadMode.RGB).permute(1, 2, 0)",
        flip="if torch.rand(()) < 0.5:\n    image = image.flip(1)"),
        "test_fast_faces_items"),
    # ---------------------------------------------------------------- Part C: to_float
    wrong("to_float", "float but not scaled to [0, 1]", """
        def to_float(images):
            return images.float()
    """, "test_to_float"),
    wrong("to_float", "scaled in place on the caller's batch", """
        def to_float(images):
            images.data = images.float().div_(255)
            return images
    """, "test_to_float"),
    wrong("to_float", "divided by 256", """
        def to_float(images):
            return images.float() / 256
    """, "test_to_float"),
    # ---------------------------------------------------------------- Part E: seed_worker
    wrong("seed_worker", "seeds with the worker id (every epoch, every seed the same)",
          _seed_worker("info.dataset.rng = np.random.default_rng(info.id)"),
          "test_seed_worker_distinct", "test_seed_worker_reproducible"),
    wrong("seed_worker", "seeds numpy's global generator, not the dataset's",
          _seed_worker("np.random.seed(info.seed % 2**32)"),
          "test_seed_worker_distinct", "test_seed_worker_reproducible"),
    wrong("seed_worker", "fails in the main process (no check for get_worker_info() is None)",
          _seed_worker("info.dataset.rng = np.random.default_rng(info.seed)", main_check=False),
          "test_seed_worker_distinct"),
    wrong("seed_worker", "fresh entropy: np.random.default_rng() without a seed",
          _seed_worker("info.dataset.rng = np.random.default_rng()"),
          "test_seed_worker_reproducible"),
]
