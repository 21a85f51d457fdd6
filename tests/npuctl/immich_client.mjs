// What Immich's server does to reach its machine-learning servers, restated with Node's own
// fetch, FormData and Blob (as server/src/repositories/machine-learning.repository.ts in
// immich-app/immich does): an availability check per URL (GET /ping, any 2xx is healthy), a
// multipart form with the JSON `entries` and the photo as a Blob (no file name) or the text,
// and healthy URLs tried first, each non-2xx marking its URL unhealthy.
//
// node immich_client.mjs URL[,URL...] PHOTO MODEL [startup]: prints what happened, as JSON.
// With "startup": what Immich does when its machine-learning server has just started: the
// availability check, then a photo's and a text's request at once, each timed.
import { readFile } from 'node:fs/promises';

const [urlList, photo, modelName, mode] = process.argv.slice(2);
const urls = urlList.split(',');
const healthy = {};

async function check(url) {
  let ok = false;
  try {
    const response = await fetch(new URL('/ping', url), { signal: AbortSignal.timeout(5000) });
    ok = response.ok;
  } catch {
    // unreachable: unhealthy
  }
  healthy[url] = ok;
}

async function getFormData(payload, config) {
  const form = new FormData();
  form.append('entries', JSON.stringify(config));
  if ('imagePath' in payload) {
    const bytes = await readFile(payload.imagePath);
    form.append('image', new Blob([new Uint8Array(bytes)]));
  } else {
    form.append('text', payload.text);
  }
  return form;
}

async function predict(payload, config) {
  const form = await getFormData(payload, config);
  const failures = [];
  const order = [...urls.filter((url) => healthy[url]), ...urls.filter((url) => !healthy[url])];
  for (const url of order) {
    try {
      const response = await fetch(new URL('/predict', url), { method: 'POST', body: form });
      if (response.ok) {
        healthy[url] = true;
        return response.json();
      }
      failures.push({ url, status: response.status, body: await response.json() });
    } catch (error) {
      failures.push({ url, error: String(error) });
    }
    healthy[url] = false;
  }
  const error = new Error('failed for all URLs');
  error.failures = failures;
  throw error;
}

const encodeImage = async (imagePath) => {
  const answer = await predict({ imagePath }, { clip: { visual: { modelName } } });
  return { clip: answer.clip, imageHeight: answer.imageHeight, imageWidth: answer.imageWidth };
};
const encodeText = async (text) =>
  (await predict({ text }, { clip: { textual: { modelName, options: { language: 'en' } } } }))
    .clip;
const detectFaces = (imagePath) =>
  predict(
    { imagePath },
    {
      'facial-recognition': {
        detection: { modelName: 'buffalo_l', options: { minScore: 0.7 } },
        recognition: { modelName: 'buffalo_l' },
      },
    },
  );

const report = {};
if (mode === 'startup') {
  report.pingSentAt = Date.now();
  for (const url of urls) await check(url);
  report.healthyAtStart = { ...healthy };
  report.predictSentAt = Date.now();
  const [image, text] = await Promise.all([encodeImage(photo), encodeText('a red car')]);
  report.predictAnsweredAt = Date.now();
  report.image = { vector: JSON.parse(image.clip), imageWidth: image.imageWidth };
  report.text = JSON.parse(text);
  report.healthyAfter = { ...healthy };
  console.log(JSON.stringify(report));
  process.exit(0);
}
for (const url of urls) await check(url);
report.healthyAtStart = { ...healthy };
const image = await encodeImage(photo);
report.image = {
  vector: JSON.parse(image.clip),
  imageHeight: image.imageHeight,
  imageWidth: image.imageWidth,
};
report.text = JSON.parse(await encodeText('a red car at the beach'));
try {
  await detectFaces(photo);
  report.faces = 'answered';
} catch (error) {
  report.faces = error.failures;
}
report.healthyAfterFaces = { ...healthy };
for (const url of urls) await check(url);
report.healthyAfterPing = { ...healthy };
report.imageAgain = JSON.parse((await encodeImage(photo)).clip);
console.log(JSON.stringify(report));
