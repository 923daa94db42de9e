"""APT, PIP and GitHub mirror settings written inside rock sandboxes.

The three strategies implement :class:`rock_core.speedup.SpeedupStrategy`; the ``rock`` entry
point ``speedup = "rock_speedup.plugin"`` registers them, and the SDK's
``sandbox.network.speedup(SpeedupType.APT | PIP | GITHUB, value)`` runs them:

- :class:`AptSpeedup` (``"apt"``): Debian/Ubuntu sources pointed at a mirror, for the image's
  own release; retry and timeout settings in ``/etc/apt/apt.conf.d/99speedup``.
- :class:`PipSpeedup` (``"pip"``): ``index-url = <mirror>/pypi/simple/`` for root and every
  ``/home/*`` user, and for uv.
- :class:`GitHubSpeedup` (``"github"``): ``/etc/hosts`` entries sending GitHub's host names
  (:data:`GITHUB_HOSTS`) to one address.
"""

from rock_speedup._validate import mirror_url
from rock_speedup.apt import AptSpeedup
from rock_speedup.github import GITHUB_HOSTS, GitHubSpeedup
from rock_speedup.pip import PipSpeedup

__version__ = "0.1.0"

__all__ = ["GITHUB_HOSTS", "AptSpeedup", "GitHubSpeedup", "PipSpeedup", "__version__", "mirror_url"]
