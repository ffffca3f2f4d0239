// AudioWorklet processor: microphone samples at the device rate -> 24 kHz PCM16 chunks.
//
// Runs on the audio rendering thread. Downsampling goes through a windowed-sinc
// low-pass (so content above 12 kHz does not fold back into the band) and then
// linear interpolation at the fractional positions of the output rate. Each full
// chunk is posted to the main thread as a transferred Int16Array buffer, with the
// chunk's RMS level for the meter.

const TARGET_RATE = 24000;
const TAPS = 63;

function lowPass(cutoff, taps) {
  // cutoff in cycles per input sample (0 .. 0.5); Blackman window; unity gain at DC
  const h = new Float32Array(taps);
  const mid = (taps - 1) / 2;
  let sum = 0;
  for (let i = 0; i < taps; i++) {
    const x = i - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w = 0.42 - 0.5 * Math.cos((2 * Math.PI * i) / (taps - 1)) + 0.08 * Math.cos((4 * Math.PI * i) / (taps - 1));
    h[i] = sinc * w;
    sum += h[i];
  }
  for (let i = 0; i < taps; i++) h[i] /= sum;
  return h;
}

class StreamResampler {
  constructor(fromRate, toRate) {
    this.step = fromRate / toRate; // input samples per output sample
    this.filter = fromRate > toRate ? lowPass((0.5 * 0.9 * toRate) / fromRate, TAPS) : null;
    this.history = new Float32Array(this.filter ? TAPS - 1 : 0);
    this.last = 0; // the previous block's last (filtered) sample, at position -1
    this.t = 0; // position of the next output sample, in input samples from the block start
  }

  filtered(block) {
    if (!this.filter) return block;
    const h = this.filter;
    const n = block.length;
    const padded = new Float32Array(this.history.length + n);
    padded.set(this.history);
    padded.set(block, this.history.length);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      let acc = 0;
      for (let k = 0; k < TAPS; k++) acc += h[k] * padded[i + k];
      out[i] = acc;
    }
    this.history = padded.slice(n);
    return out;
  }

  process(block, emit) {
    const f = this.filtered(block);
    const n = f.length;
    if (n === 0) return;
    while (this.t < n - 1) {
      const i = Math.floor(this.t);
      const frac = this.t - i;
      const a = i < 0 ? this.last : f[i];
      const b = f[i + 1];
      emit(a + (b - a) * frac);
      this.t += this.step;
    }
    this.t -= n;
    this.last = f[n - 1];
  }
}

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const chunkMs = (options.processorOptions && options.processorOptions.chunkMs) || 40;
    this.chunkSamples = Math.round((TARGET_RATE * chunkMs) / 1000);
    this.chunk = new Int16Array(this.chunkSamples);
    this.fill = 0;
    this.energy = 0;
    this.resampler = new StreamResampler(sampleRate, TARGET_RATE);
    this.enabled = true;
    this.port.onmessage = (event) => {
      if (event.data && event.data.type === "enable") this.enabled = Boolean(event.data.enabled);
    };
    this.emit = (value) => {
      const v = Math.max(-1, Math.min(1, value));
      this.energy += v * v;
      this.chunk[this.fill++] = v < 0 ? Math.round(v * 0x8000) : Math.round(v * 0x7fff);
      if (this.fill === this.chunkSamples) {
        const level = Math.sqrt(this.energy / this.fill);
        const full = this.chunk;
        // currentTime: the AudioContext time of this render quantum, when the chunk's last sample was captured
        this.port.postMessage({ type: "chunk", pcm: full.buffer, level, at: currentTime }, [full.buffer]);
        this.chunk = new Int16Array(this.chunkSamples); // the posted buffer is detached now
        this.fill = 0;
        this.energy = 0;
      }
    };
  }

  process(inputs) {
    const input = inputs[0];
    if (this.enabled && input && input.length > 0 && input[0].length > 0) {
      let mono = input[0];
      if (input.length > 1) {
        mono = new Float32Array(input[0].length);
        for (let c = 0; c < input.length; c++) {
          const channel = input[c];
          for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / input.length;
        }
      }
      this.resampler.process(mono, this.emit);
    }
    return true;
  }
}

registerProcessor("s2s-capture", CaptureProcessor);
