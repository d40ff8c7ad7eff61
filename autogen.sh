#!/bin/sh
set -e
mkdir -p config
autoreconf -fi
