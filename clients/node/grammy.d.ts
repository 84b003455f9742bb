export * from './middleware.js';
export { default } from './middleware.js';
