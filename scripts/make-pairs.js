#!/usr/bin/env node
// Sentence-embedding pairs from the IMDB reviews (node stdlib only; no npm
// dependencies). Used by scripts/fetch-pairs.sh.
//
//   node make-pairs.js <imdb/train.jsonl> <out-dir>
//
// writes <out-dir>/{train,dev,test}.jsonl, one {"anchor": .., "positive": ..}
// per line: the two halves of one review. Prints each file's row count and
// sha256, and how many reviews each rule dropped.
//
// The rule:
//   1. Text. data/imdb keeps a review's "<br />" breaks as spaces (see
//      fetch-data-convert.js); here every run of white space becomes one space
//      and the ends are trimmed. Nothing else is changed (the few other tags
//      some reviewers typed, "<i>", "<grin>", stay as they are).
//   2. Duplicates. A review whose normalized text appeared on an earlier line
//      is dropped (IMDB repeats 418 texts exactly, 422 once white space is
//      normalized); after rule 4, so is a review with a half equal to either
//      half of a review kept on an earlier line (21 reviews: a reviewer's
//      re-posted, lightly edited text). So no text and no half is
//      in two pairs, and no test or dev half is seen in training.
//   3. Split point. A sentence boundary is a space that follows ".", "!" or
//      "?" (a run of them, then optional closing quotes or brackets) and
//      precedes an upper-case ASCII letter or a digit (after optional opening
//      quotes or brackets); a single "." after a lone letter ("J. Smith") or
//      after Mr, Mrs, Ms, Dr, St, Jr, Sr, Prof, Mt, Lt, Sgt, Capt, Col, Gen,
//      vs, No, Vol is not one. The review is cut at the boundary nearest its
//      middle, counted in characters (JavaScript string length, UTF-16 units);
//      a tie goes to the earlier one. A review with no boundary (one sentence)
//      is cut at the space nearest its middle instead. anchor = the text
//      before the cut, positive = the text after it, both trimmed.
//   4. Length. A review is kept only when both halves have at least 20 words
//      (white-space separated), so very short reviews and reviews whose only
//      sentence boundaries are far from the middle are dropped.
//   5. Draw. Each kept review's key is the SHA-256 of its normalized text.
//      Per IMDB label, the kept reviews are sorted by key; test takes the
//      first 500 of each label, dev the next 500, train the next 10 000. So
//      the splits hold distinct reviews, each is half negative and half
//      positive, and test and dev stay the same if the train size changes.
//      Within a file the rows are in key order (labels interleaved). The label
//      itself is not written: a "label" column would be taken as the loss's
//      labels by sentence-transformers' trainer.
//
// Each file is written to a temp file beside the target and renamed, so an
// interrupted run never leaves a half-written output that looks done.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const SIZES = [['test', 500], ['dev', 500], ['train', 10000]]; // per label, drawn in this order
const MIN_WORDS = 20;
const ABBREV = new Set(['Mr', 'Mrs', 'Ms', 'Dr', 'St', 'Jr', 'Sr', 'Prof', 'Mt', 'Lt', 'Sgt', 'Capt', 'Col', 'Gen',
  'vs', 'No', 'Vol']);
// Group 1: the word before the punctuation; group 2: the punctuation run.
const BOUNDARY = /(\S*?)([.!?]+)["'\u201d\u2019)\]]* (?=["'\u201c\u2018(\[]*[A-Z0-9])/g;

const sha256 = (s) => crypto.createHash('sha256').update(s).digest('hex');
const words = (s) => (s === '' ? 0 : s.split(' ').length);

function writeAtomic(target, text) {
  const tmp = `${target}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, target);
}

// The offsets of the spaces that are sentence boundaries (rule 3).
function sentenceBoundaries(text) {
  const out = [];
  for (const m of text.matchAll(BOUNDARY)) {
    const before = m[1].replace(/^["'\u201c\u2018(\[]+/, '');
    if (m[2] === '.' && (/^[A-Za-z]$/.test(before) || ABBREV.has(before))) continue;
    out.push(m.index + m[0].length - 1); // the space
  }
  return out;
}

function nearest(offsets, mid) {
  let best = -1;
  for (const p of offsets) {
    if (best < 0 || Math.abs(p - mid) < Math.abs(best - mid)) best = p;
  }
  return best;
}

// {anchor, positive, bySentence} or null when the text has no space at all.
function halves(text) {
  const mid = text.length / 2;
  let cut = nearest(sentenceBoundaries(text), mid);
  const bySentence = cut >= 0;
  if (!bySentence) {
    const spaces = [];
    for (let i = text.indexOf(' '); i >= 0; i = text.indexOf(' ', i + 1)) spaces.push(i);
    cut = nearest(spaces, mid);
    if (cut < 0) return null;
  }
  return { anchor: text.slice(0, cut).trim(), positive: text.slice(cut + 1).trim(), bySentence };
}

function makePairs(src, outDir) {
  const lines = fs.readFileSync(src, 'utf8').split('\n').filter((l) => l !== '');
  const seen = new Set();
  const pools = { 0: [], 1: [] };
  const halvesSeen = new Set();
  const dropped = { duplicate: 0, short: 0, half: 0 };
  let byWord = 0;
  lines.forEach((line, i) => {
    const row = JSON.parse(line);
    if (typeof row.text !== 'string' || (row.label !== 0 && row.label !== 1)) {
      throw new Error(`${src}: line ${i + 1} is not {text: string, label: 0|1}`);
    }
    const text = row.text.replace(/\s+/g, ' ').trim();
    const key = sha256(text);
    if (seen.has(key)) {
      dropped.duplicate++;
      return;
    }
    seen.add(key);
    const h = halves(text);
    if (!h || words(h.anchor) < MIN_WORDS || words(h.positive) < MIN_WORDS) {
      dropped.short++;
      return;
    }
    if (halvesSeen.has(h.anchor) || halvesSeen.has(h.positive)) {
      dropped.half++;
      return;
    }
    halvesSeen.add(h.anchor).add(h.positive);
    if (!h.bySentence) byWord++;
    pools[row.label].push({ key, anchor: h.anchor, positive: h.positive, byWord: !h.bySentence });
  });
  const byKey = (a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  for (const label of [0, 1]) pools[label].sort(byKey);
  const need = SIZES.reduce((n, [, k]) => n + k, 0);
  for (const label of [0, 1]) {
    if (pools[label].length < need) {
      throw new Error(`label ${label}: ${pools[label].length} usable reviews, the splits need ${need}`);
    }
  }
  console.log(`${lines.length} reviews: ${dropped.duplicate} repeated texts dropped, ${dropped.short} with a half ` +
    `under ${MIN_WORDS} words dropped, ${dropped.half} repeating a kept half dropped; usable ${pools[0].length} negative, ${pools[1].length} positive ` +
    `(${byWord} of them cut at a word: no sentence boundary)`);
  fs.mkdirSync(outDir, { recursive: true });
  let at = 0;
  for (const [name, perLabel] of SIZES) {
    const rows = pools[0].slice(at, at + perLabel).concat(pools[1].slice(at, at + perLabel)).sort(byKey);
    at += perLabel;
    const text = rows.map((r) => JSON.stringify({ anchor: r.anchor, positive: r.positive })).join('\n') + '\n';
    const target = path.join(outDir, `${name}.jsonl`);
    writeAtomic(target, text);
    const cutAtWord = rows.filter((r) => r.byWord).length;
    console.log(`${name}.jsonl: ${rows.length} pairs (${perLabel} per label, ${cutAtWord} cut at a word), ` +
      `sha256 ${sha256(text)}`);
  }
}

module.exports = { halves, sentenceBoundaries };

if (require.main === module) {
  const [src, outDir] = process.argv.slice(2);
  if (!src || !outDir) {
    console.error('usage: make-pairs.js <imdb/train.jsonl> <out-dir>');
    process.exit(2);
  }
  try {
    makePairs(src, outDir);
  } catch (e) {
    console.error(`make-pairs: ${e.message}`);
    process.exit(1);
  }
}
