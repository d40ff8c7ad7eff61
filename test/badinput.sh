#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# Bad input (garbage addresses, unknown fi_addr and keys, oversized ops, too
# many iovs, NULL descs, zero lengths) to one multirail endpoint that writes
# to itself over two loopback rails: every bad call refused, nothing corrupt.
export FI_PROVIDER_PATH="$(pwd)/.libs"
unset FI_PROVIDER
export FI_MULTIRAIL_RAILS=lo,lo
timeout 120 ./test/badinput_test
