#!/usr/bin/env bash
# Does `pip install ctfile` keep an environment that already has boto3 consistent?
#
# s3fs -> aiobotocore pins botocore to a narrow range (aiobotocore 3.10.0:
# >=1.43.115,<1.43.118). pip only resolves the packages it is asked to
# install and their dependencies, so into an environment holding a newer boto3
# it used to downgrade botocore and leave boto3 broken (`pip check`:
# "boto3 ... has requirement botocore<1.45.0,>=1.44.5, but you have botocore
# 1.43.117"). ctfile therefore depends on boto3 itself, which puts boto3 in the
# resolution: pip then moves boto3 to a release matching the botocore that
# aiobotocore allows (what aiobotocore 3.0 recommends in place of its removed
# `boto3` extra).
#
# This script reproduces the scenario in a throw-away virtualenv: boto3 first
# (the newest, or BOTO3=boto3==1.35.0 for an old one), then ctfile from SOURCE
# (default: this checkout), then `pip check`. It exits non-zero if pip check
# finds a broken requirement. Needs network access to PyPI; takes about a
# minute (pyarrow and numpy wheels).
#
#   scripts/check_install_beside_boto3.sh [SOURCE]    (PYTHON=python3.12 picks the interpreter)
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"${PYTHON:-python3}" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
"${pip[@]}" install --quiet "${BOTO3:-boto3}"
versions() { "${pip[@]}" list 2>/dev/null | grep -iE '^(boto3|botocore|aiobotocore|s3fs) ' | tr -s ' ' | paste -sd ',' -; }
echo "pip $("${pip[@]}" --version | cut -d' ' -f2); before ctfile: $(versions)"
"${pip[@]}" install --quiet "$src"
echo "after installing $src: $(versions)"
"${pip[@]}" check
