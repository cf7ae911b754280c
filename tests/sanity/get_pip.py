"""An offline stand-in for the get-pip script that `ansible-test` downloads to bootstrap pip.

ansible-test (ansible-core 2.19) creates an empty virtual environment for each sanity test and runs
`python get_pip_<version>.py --disable-pip-version-check pip==<version> --no-setuptools --no-wheel`
in it, fetching that script from a host outside the package registries. This script does the same job
with what every CPython carries and the package index pip already uses: `ensurepip` installs the bundled
pip, which then installs the exact pip that ansible-test asked for. `tests/sanity/ansible_test.sh` copies it
to where ansible-test looks for its cached download (~/.ansible/test/cache/get_pip_<version>.py).
"""
from __future__ import annotations

import ensurepip
import os
import subprocess
import sys

# get-pip understands these two; pip itself does not (it never installs setuptools or wheel unasked).
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    # ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the second pip must see the
    # machine's own pip configuration (index, certificate authority), as the downloaded get-pip would.
    environment = dict(os.environ)
    ensurepip.bootstrap(upgrade=False, default_pip=True)
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    return subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", *args], env=environment)


if __name__ == "__main__":
    sys.exit(main())
