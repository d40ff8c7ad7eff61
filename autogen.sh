#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
set -e
mkdir -p config
autoreconf -fi
