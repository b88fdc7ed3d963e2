"""Package metadata for the MuZero-first SEED-style planning agent.

The default install is CPU-only (tensorflow-cpu). For an NVIDIA GPU, install the
CUDA build instead; the two TensorFlow wheels must never be installed together:

    pip install -e . --no-deps            # the package itself
    pip install 'tensorflow[and-cuda]>=2.17'  # the GPU build
    pip install -e '.[gpu]'               # remaining dependencies, skipping tensorflow-cpu

See README.md, "GPU install".
"""
import os

from setuptools import find_packages, setup

_CPU_TF = "tensorflow-cpu>=2.17"
_GPU = os.environ.get("MUZERO_TF_GPU", "") == "1"

install_requires = [
    "numpy>=2,<2.5",
    "numba>=0.60",
    "grpcio>=1.60",
    "absl-py>=2.0",
    "gymnasium>=1.0",
    "ale-py>=0.10",
    "tensorboard>=2.17",
    "matplotlib>=3.8",
    "pillow>=10",   # GIFs of played episodes (python -m muzero.eval --video); matplotlib needs it too
]
# With MUZERO_TF_GPU=1 the CPU wheel is left out so that `tensorflow[and-cuda]`
# can be installed on its own; the two wheels must never sit side by side.
if not _GPU:
    install_requires.insert(0, _CPU_TF)

setup(
    name="muzero",
    version="0.1.0",
    description="MuZero-first planning agents in the SEED RL shape: Numba batched MCTS "
    "actors, a batched gRPC inference server, prioritized replay, TensorFlow learner.",
    long_description=open(os.path.join(os.path.dirname(__file__), "README.md")).read()
    if os.path.exists(os.path.join(os.path.dirname(__file__), "README.md"))
    else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["muzero", "muzero.*", "envs", "envs.*"]),
    install_requires=install_requires,
    extras_require={
        # ray, minatar and the video and offline extras are here so that `make test` covers the
        # Ray launcher, the MinAtar envs, MP4 recording and datasets (their tests skip without them).
        "dev": ["pytest>=8", "hypothesis>=6.100", "ray>=2.30", "minatar>=1.0.15", "imageio-ffmpeg>=0.5",
                "pygame>=2.1", "minari[hdf5]>=0.5"],
        # Recorded experience in Minari's format (python -m muzero.record, --dataset).
        "offline": ["minari[hdf5]>=0.5"],
        # python -m muzero.eval --video=<file>.mp4 (imageio-ffmpeg ships its own ffmpeg binary),
        # and Gymnasium's rgb_array render of classic-control and Box2D envs (pygame).
        "video": ["imageio-ffmpeg>=0.5", "pygame>=2.1"],
        "ray": ["ray>=2.30"],
        # Box2D envs (gym:LunarLander-v3, gym:LunarLanderContinuous-v3, gym:BipedalWalker-v3):
        # Gymnasium's box2d module also imports pygame. Gymnasium's own [box2d] extra pins
        # box2d-py 2.3.5, which compiles from source; the box2d package ships wheels.
        "box2d": ["box2d>=2.3.10", "pygame>=2.1"],
        # Goal envs (gym:FetchReach-v4, ...). gymnasium-robotics 1.4 breaks on MuJoCo 4
        # (an assertion on joint types when the Fetch robot resets), hence the pin.
        "robotics": ["gymnasium-robotics>=1.4,<1.5", "mujoco>=3.3,<3.4"],
        # MinAtar games (minatar:Breakout, ...). The games are pure Python and NumPy, but the
        # package declares pandas, scipy and seaborn (used only by its rendering), hence an extra.
        "minatar": ["minatar>=1.0.15"],
        "gpu": ["tensorflow[and-cuda]>=2.17"],
    },
    entry_points={},
)
