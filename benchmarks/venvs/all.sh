#!/usr/bin/env bash
# Builds every peer venv, one after another (each is independent; a failure is reported, not fatal).
cd "$(dirname "$0")"
for peer in datatrove textdedup datajuicer; do
  echo "== $peer"
  bash "$peer.sh" || echo "!! $peer install failed (exit $?)"
done
